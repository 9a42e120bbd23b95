"""The deterministic test models `scripted/...`, picked by name in params like any model."""
