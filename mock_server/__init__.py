"""Bundled offline mock teacher: a real HTTP server speaking the Open Inference Protocol v2."""
