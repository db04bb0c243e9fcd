"""The words `ridgeline bench` builds prompts from: common English words that are one token
each (with their leading space) in the usual BPE vocabularies (GPT-2, cl100k, Llama), so a
prompt of n words is n tokens. Its own module so that the prompt tagger and calibrate's GGUF
vocabulary read it without loading the HTTP client.
"""

WORDS = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "as", "with", "by", "at", "from",
    "his", "an", "were", "are", "which", "this", "be", "has", "had", "not", "but", "one", "have",
    "their", "its", "after", "all", "also", "they", "who", "new", "first", "two", "been", "more",
    "other", "time", "there", "some", "only", "than", "into", "most", "over", "when", "her",
    "would", "years", "made", "can", "out", "used", "may", "about", "such", "many", "these",
    "state", "city", "during", "then", "world", "three", "up", "year", "while", "where", "both",
    "between", "under", "high", "called", "part", "since", "work", "later", "each", "them",
    "known", "area", "through", "well", "because", "people", "until", "back", "day", "life",
    "season", "same", "long", "name", "group", "four", "game", "house", "line", "last", "family",
)

__all__ = ["WORDS"]
