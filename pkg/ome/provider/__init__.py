"""The capacity provider behind TPU slices; one small module per provider (GKE today)."""
