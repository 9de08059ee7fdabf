"""The release version, shared in lockstep by the core and every provider wheel."""

__version__ = "0.1.0"
