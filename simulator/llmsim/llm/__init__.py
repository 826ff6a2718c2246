"""The generator decides *what* is said: prompt token counts, scripted responses, truncation.

It never deals with time, HTTP or metrics.
"""
