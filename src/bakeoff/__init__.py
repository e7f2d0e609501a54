"""bakeoff: find the fastest inference configuration that is actually correct."""

__version__ = "0.1.0"
