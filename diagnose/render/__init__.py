"""Views of a Diagnosis: terminal (rich), Markdown (tickets), JSON (the versioned contract)."""
