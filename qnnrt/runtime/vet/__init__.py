"""Vetting context binaries qnnrt did not write, so that a corrupt one never takes the user's
process down: the policy and the parent's side (policy.py), the disposable child that makes the
risky QNN calls (child.py, its own process), the messages between them (protocol.py), and the
step watch of "worker" mode (watch.py). Kept light: the child imports this package."""
