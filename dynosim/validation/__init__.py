"""Fidelity checks above the simulation: replays of real-GPU measurements in the simulator.

This package sits above ``dynosim.simulation`` (it runs simulations), unlike ``dynosim.perf``,
which the simulation imports.
"""
