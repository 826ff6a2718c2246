"""End-to-end tests: the operator, fleets, a gateway and Prometheus on a real cluster (make e2e)."""
