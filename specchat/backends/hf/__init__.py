"""transformers (torch) as a runtime: loading, prepacked linears, the backend."""
