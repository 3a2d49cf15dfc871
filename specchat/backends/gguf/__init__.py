"""Reading GGUF files: the header, the tensors without dequantizing, the vocabulary."""
