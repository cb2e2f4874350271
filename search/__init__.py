"""Multi-objective autotuning of serving deployments around the dynosim simulator.

Stages, each importing only the ones below it (``tests/unit/test_layering_search.py``):
``study/`` (what to tune) -> ``trial.py`` (the record of one evaluation) -> ``store/`` (the
Optuna record) -> ``optimizers/`` -> ``results/`` (reading a study) -> ``run/`` (evaluating and
driving) and ``export/`` (a trial as launch commands) -> ``cli/``.

Heavy libraries (optuna, pymoo, ray, plotly) are imported lazily inside the modules that use
them, so ``dynosim simulate`` starts fast.
"""

from dynosim.moved import install

install(
    {
        "search.report": "search.results (front, best, tables, write, labels), "
        "search.store.schema (is_feasible, is_runnable, study_objectives, slo_constraints) "
        "and search.store.open.load_study",
        "search.storage": "search.store.open (open_storage, study_names), search.store.record "
        "(StudyRecord) and search.results.counts (trial_counts)",
        "search.driver": "search.run.driver (run_study, RunState); load_workload is in "
        "search.study.workload",
        "search.evaluator": "search.run.evaluate (prepare, evaluate_one), search.run.evaluators "
        "(Evaluator, LocalEvaluator) and search.trial (TrialResult)",
        "search.load": "search.study.load (LoadSpec, load_axis) and search.run.capacity "
        "(find_capacity)",
        "search.problem": "search.study.problem (Problem), search.study.objectives and "
        "search.trial (config_hash, params_key)",
        "search.study_file": "search.study.study_file (load_study_file, StudyFile) and "
        "search.study.sections",
        "search.space": "search.study.space",
        "search.convergence": "search.results.hypervolume",
        "search.importance": "search.results.importance (and search.results.tables for the table)",
        "search.plots": "search.results.pages.study",
        "search.timeline_plot": "search.results.pages.timeline",
        "search.validation_plot": "search.results.pages.validation",
        "search.studies_listing": "search.results.tables",
        "search.lease": "search.store.lease",
        "search.journal": "search.store.journal",
        "search.ray_evaluator": "search.run.ray_evaluator",
        "search.terminal": "search.cli.shared",
        # a submodule's parent is imported first, so this one line answers for all eight
        "search.commands": "search.cli.simulator (simulate, validate, calibrate) and "
        "search.cli.study (tune, resume, report, studies, export)",
    }
)
