"""Judging decoders: races (one orchestrator for compare, the race screen and bench) and variants."""
