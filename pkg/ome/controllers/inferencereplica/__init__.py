"""The InferenceReplica controller: Instances, their pods, revisions, holds and teardown."""
