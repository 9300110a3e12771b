"""Operating-system plumbing every layer may use: atomic files and fsync, a full disk as one clear error, child
processes that never outlive the run, signals, safe path names, the machine's facts and per-machine decisions,
malloc tuning, the agentrl home folder, progress callbacks. Nothing here imports the rest of agentrl_core."""
