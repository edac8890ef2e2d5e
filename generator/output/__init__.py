"""What a generated file looks like on disk: header (upstream's modular banner left out), diff, atomic writes."""
