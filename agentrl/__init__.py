"""agentrl: the command line over agentrl_core and the Prefect flows."""
