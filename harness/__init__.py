"""Boot-feasibility harness for vLLM servers: will this exact configuration boot, and if not, why and by how much?"""

__version__ = "0.1.0"
