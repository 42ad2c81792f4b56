"""The runtime: store, scheduler, supervisor, launch preparation; pydantic-free."""
