"""HTTP routers of the extender, one per concern: scheduling verbs (filter, prioritize),
binding, health, metrics."""
