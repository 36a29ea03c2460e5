"""Infra tier: Template assertions and cdk-nag on the CDK app."""
