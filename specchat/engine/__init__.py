"""The runtime: the generation loop on a local model or a remote server, its events and stats."""
