"""Targets -> build contexts: Dockerfiles from the templates, the rendered-file guard, the shared CUDA layer format, CI documents."""
