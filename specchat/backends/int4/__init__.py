"""The int4 runtime: a transformer forward over a GGUF file's own 4-bit weights, in C."""
