"""Where images go: a layer file, a whole image (layout or archive), a bind-mount overlay."""
