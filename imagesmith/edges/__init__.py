"""The only code that talks to the outside: the Docker engine, registries, Harbor, signing keys, package sources, NVML.

Used by stages (and pipeline); never by the model, render or report."""
