"""specchat: a terminal chat for local LLMs that makes fast decoding visible."""

__version__ = "0.1.0"
