"""TicToc: tool-call decisions after elapsed time (NAR, attempt rates)."""
