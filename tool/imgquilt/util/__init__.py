"""Small helpers with no imgquilt knowledge."""
