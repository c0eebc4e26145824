"""The InferenceService controller: it projects each component onto an InferenceReplica."""
