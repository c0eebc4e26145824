"""Not product code: the simulated GKE TPU provider (node pools, Slice scheduler, scheduler
and kubelet stand-ins) that plays GKE's part against any API server."""
