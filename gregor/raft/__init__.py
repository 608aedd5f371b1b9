"""The metadata quorum (KIP-595, KIP-630, KIP-996): see node.py."""
