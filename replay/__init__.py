"""replay: dependency-preserving replay of agent traces against LLM servers and a reference simulator."""

__version__ = "0.1.0"
