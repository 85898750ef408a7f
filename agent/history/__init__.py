"""The offline phase on an organisation's own history (AidAI §4.1): import, taxonomy construction, verification
mining, growth over time and the feedback loop of resolved diagnoses."""
