"""Other implementations of node-ipam-lb's job, run here to compare with ours."""
