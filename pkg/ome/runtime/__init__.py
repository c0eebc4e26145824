"""The Kubernetes runtime layer: knows nothing of TPUs."""
