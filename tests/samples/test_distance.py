"""Tests for eagle3lib.samples.distance: how far served sequences are from the training samples."""
from __future__ import annotations

from eagle3lib.samples.distance import distance_text, served_distance

# token ids: 1 BOS, 3 user, 2 end, 4 assistant; words 10.. (one domain), 50.. (another)
TRAIN = [([1, 3, 10, 11, 12, 2, 4, 13, 14, 15, 2], [0] * 7 + [1] * 4),
         ([1, 3, 11, 12, 2, 4, 10, 13, 2], [0] * 6 + [1] * 3)]


def test_served_like_the_training_samples_is_near():
    d = served_distance(TRAIN, TRAIN)
    assert d["token_overlap"] == 1.0 and d["bigram_overlap"] == 1.0
    assert d["opening_match"] == 1.0 and d["header_match"] == 1.0 and d["opening_training"] == [1, 3]
    assert d["header_training"] == [2, 4]
    assert d["prompt_len_served"] == d["prompt_len_training"] == 6.5


def test_another_domain_and_another_template_show_as_such():
    domain = [([1, 3, 50, 51, 2, 4, 52, 53, 54, 2], [0] * 6 + [1] * 4)]
    d = served_distance(TRAIN, domain)
    assert d["token_overlap"] < 0.7 and d["bigram_overlap"] < 0.5 and d["opening_match"] == 1.0
    plain = [([10, 11, 12, 13, 14, 15], [0, 0, 0, 1, 1, 1])]           # no chat template at all
    p = served_distance(TRAIN, plain)
    assert p["opening_match"] == 0.0 and p["header_match"] == 0.0 and p["token_overlap"] == 1.0
    assert "template's opening in 0%" in distance_text(p)


def test_nothing_to_compare_is_empty():
    assert served_distance([], TRAIN) == {} and served_distance(TRAIN, []) == {}
    assert distance_text({}) == "distance not measured"
