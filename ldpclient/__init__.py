"""ldpclient: label private images with a remote teacher that only ever sees LDP releases."""

__version__ = "0.1.0"
