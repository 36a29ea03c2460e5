"""The local platform: the embedded AWS emulator, its provisioning, and the
supervisor that plays the parts the emulator cannot run (Lambda, ECS, AppConfig
deployments)."""
