"""The Switchyard CDK app (``stacks.app``) and the deployed layouts it ships
(``stacks.assets``, which imports no CDK and also serves the local platform)."""
