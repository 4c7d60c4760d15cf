"""Container images: references, transports (sources), layer reading, and writers (sinks)."""
