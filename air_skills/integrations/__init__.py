"""Integrations with agent clients: skills and MCP client configuration."""
