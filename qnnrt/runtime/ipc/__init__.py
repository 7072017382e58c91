"""What every child process of qnnrt shares with its parent (the PD workers, the vetting child):
the framing, transport, spawn and stop of a channel (child.py) and the typed wire its messages
travel on (wire.py: frozen dataclasses by their declared field types, never pickle). Both sides
import these; nothing here knows what the messages mean."""
