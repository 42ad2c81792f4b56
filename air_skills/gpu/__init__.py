"""GPUs: value types, providers (NVML, simulated), health checks, deep check, doctor."""
