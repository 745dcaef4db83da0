"""Side-by-side benchmarks against the libraries users would otherwise pick."""
