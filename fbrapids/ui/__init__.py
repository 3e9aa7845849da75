"""What a person sees: progress bars, notebook displays and plots."""
