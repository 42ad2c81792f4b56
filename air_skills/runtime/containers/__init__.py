"""Container jobs: the engine (podman or docker), its run argv, stop and removal, and the image-ID
cache.

May use store, results and process.
"""
