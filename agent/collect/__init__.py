"""Hosts recorded once, diagnosed anywhere: the one-file collector (collector.py, generated with its payload by
package.py), the host bundles it writes and NVIDIA's bug reports read as recordings (bundle.py, bugreport.py)."""
