"""TimelyChat: response timing and time-conditioned replies of TIMER checkpoints."""
