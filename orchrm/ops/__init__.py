"""Side effects: MLflow tracking and the registry, the pyfunc, serving (load_reward_model and the orchestrators), the pipeline's stages."""
