"""User verbs that orchestrate the core (queue, engine, store, sources) and return values."""
