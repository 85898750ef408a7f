"""`aidai serve`: the diagnosis as a web service (FastAPI) with a web page for the on-call engineer.

config (tokens, limits, the hosts it may check) → app (routes) → runs (worker threads driving Diagnoser) →
store (run metadata and events in sqlite; the LangGraph checkpoints stay where agent.diagnosis keeps them).
"""
