"""What a generated file looks like on disk: header, diff, atomic writes."""
