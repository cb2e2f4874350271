import math

import pytest

from dynosim import checks
from dynosim.errors import ConfigError
from dynosim.moved import install


@pytest.mark.parametrize(
    ("value", "low", "high"),
    [(True, 0, None), (1.0, 0, None), (0, 1, None), (11, 1, 10), ("3", None, None)],
)
def test_integer_refuses(value: object, low: int | None, high: int | None) -> None:
    with pytest.raises(ConfigError, match=r"^x: got .*; allowed: an integer"):
        checks.integer("x", value, low, high)


def test_integer_message_names_bounds() -> None:
    with pytest.raises(ConfigError, match=r"allowed: an integer in \[1, 65,536\]$"):
        checks.integer("engine.max_num_seqs", 0, 1, 65536)
    assert checks.integer("x", 7, 1) == 7


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "1", None, 10**400])
def test_number_refuses_non_finite(value: object) -> None:
    with pytest.raises(ConfigError):
        checks.number("x", value)


def test_number_open_bounds() -> None:
    with pytest.raises(ConfigError, match=r"a finite number in \(0, 1\]"):
        checks.number("x", 0, 0, 1, open_low=True)
    with pytest.raises(ConfigError, match="a finite number < 1"):
        checks.number("x", 1.0, high=1, open_high=True)
    assert checks.number("x", 1, 0, 1) == 1.0


def test_choice_flag_text_mapping_keys() -> None:
    assert checks.choice("b", "a", ("a", "b")) == "a"
    with pytest.raises(ConfigError, match=r"allowed: a \| b"):
        checks.choice("b", "c", ("a", "b"))
    with pytest.raises(ConfigError, match=r"true \| false"):
        checks.flag("f", 1)
    with pytest.raises(ConfigError, match="a non-empty string"):
        checks.text("t", "")
    with pytest.raises(ConfigError, match="a mapping"):
        checks.mapping("m", [1])
    with pytest.raises(ConfigError, match=r"^m\.z: got 1; allowed: a, b$"):
        checks.known_keys("m", {"a": 0, "z": 1}, ("a", "b"))


def test_moved_module_names_the_new_place() -> None:
    install({"dynosim.no_such_old_module": "dynosim.checks"})
    with pytest.raises(ModuleNotFoundError, match=r"has moved: use dynosim\.checks"):
        import dynosim.no_such_old_module  # type: ignore[import-not-found]
    import dynosim.checks  # a module that exists is never shadowed  # noqa: F401
