"""The things world's words beyond the objects: settings, colours, sizes, patterns, counts, relations, vague nouns.

Keys are the fact names of `kitm.relevance.things_facts`; repeated words in a tuple are weights (captions draw
uniformly). A setting has places (prepositional phrases: "on a sandy beach") and names (noun phrases: "a sandy
beach", for "A sandy beach with two umbrellas"). Adjectives of a place ("sunny", "busy") are decoration.
"""

from __future__ import annotations

SETTING_PLACES = {
    "park": ("in a park", "in the park", "in the park", "on the grass", "on the grass", "in a grassy field",
             "on a green lawn", "in an open field", "on a grassy hill", "in a city park", "near some trees",
             "in the middle of a field", "on a patch of grass", "in a sunny park", "across the lawn", "in the grass",
             "on a grassy area", "in a field"),
    "beach": ("on the beach", "on the beach", "on a sandy beach", "at the beach", "by the ocean", "on the shore",
              "near the water", "along the shoreline", "on the sand", "at the seaside", "by the waves",
              "on a sunny beach", "near the surf", "on the coast"),
    "street": ("on a city street", "on the street", "on the street", "in the city", "on a busy street", "downtown",
               "on the sidewalk", "at an intersection", "on a quiet road", "in front of a building", "in traffic",
               "along the road", "on a narrow street", "by the curb", "on a street corner"),
    "snow": ("in the snow", "in the snow", "on a snowy hill", "in a snowy field", "on a ski slope",
             "in the winter snow", "on fresh snow", "in a snow covered yard", "on a frozen field",
             "on a snowy mountain", "in deep snow", "on a cold winter day"),
    "kitchen": ("in a kitchen", "in the kitchen", "on a kitchen counter", "on the counter", "on a kitchen table",
                "on a countertop", "near the stove", "in a small kitchen", "on the table", "on a wooden table",
                "next to the sink", "in a restaurant kitchen"),
    "living room": ("in a living room", "in the living room", "inside a house", "in a cozy room", "indoors",
                    "in the den", "on the living room floor", "in a family room", "at home", "on a rug",
                    "in a bright room", "in an apartment"),
    "bedroom": ("in a bedroom", "in the bedroom", "in a hotel room", "in a small bedroom", "in a guest room",
                "in a dim bedroom", "in a dorm room", "in a child's room", "upstairs in the bedroom"),
    "lake": ("on the lake", "in the water", "on a calm lake", "by the river", "on the water", "in a pond",
             "near the shore of a lake", "on a quiet river", "in the harbor", "on the river", "at the marina",
             "on still water"),
    "farm": ("on a farm", "in a pasture", "in a fenced field", "in the countryside", "in a meadow",
             "behind a wooden fence", "on a hillside", "near a barn", "on a ranch", "in a green pasture",
             "on farmland", "in a paddock"),
    "savanna": ("on the savanna", "in the wild", "on the plains", "in a dry field", "in the grasslands",
                "at a wildlife park", "in a zoo enclosure", "near some acacia trees", "under the hot sun",
                "in the dry grass", "on a safari", "in a dusty field"),
    "forest": ("in the woods", "in a forest", "among the trees", "in a dense forest", "on a forest trail",
               "in the wilderness", "near some pine trees", "in a wooded area", "on a mountain trail",
               "in a forest clearing", "by a fallen log"),
    "sky": ("in the sky", "in the sky", "in a blue sky", "against a clear sky", "high in the sky", "in the air",
            "against the clouds", "in a cloudy sky", "overhead", "above the clouds", "against a gray sky",
            "in the open sky"),
}
SETTING_NAMES = {
    "park": ("a grassy park", "a green field", "a sunny park", "an open field", "a public park", "a big lawn"),
    "beach": ("a sandy beach", "a sunny beach", "a crowded beach", "the seashore", "an ocean beach"),
    "street": ("a city street", "a busy street", "an urban street", "a downtown road", "a quiet street"),
    "snow": ("a snowy field", "a snow covered hill", "a winter landscape", "a ski slope", "a snowy yard"),
    "kitchen": ("a kitchen", "a small kitchen", "a clean kitchen", "a kitchen counter", "a cozy kitchen"),
    "living room": ("a living room", "a cozy living room", "a family room", "a bright living room"),
    "bedroom": ("a bedroom", "a small bedroom", "a tidy bedroom", "a hotel room", "a messy bedroom"),
    "lake": ("a calm lake", "a quiet river", "a pond", "a harbor", "a lake"),
    "farm": ("a farm", "a green pasture", "a country meadow", "a fenced field", "a ranch"),
    "savanna": ("the savanna", "a dry grassland", "a wildlife park", "the African plains", "a zoo enclosure"),
    "forest": ("a forest", "a dark forest", "a wooded area", "a pine forest", "a forest clearing"),
    "sky": ("a blue sky", "a clear sky", "a cloudy sky", "the open sky", "a bright sky"),
}
# When: decoration after a place ("on a sunny day"), outdoors or indoors.
_OUTDOOR_TIMES = ("on a sunny day", "on a sunny day", "on a cloudy day", "at sunset", "early in the morning",
                  "in the late afternoon", "on a warm summer day", "in the evening light", "under a bright sun",
                  "on a windy day", "at dawn", "in the golden hour", "on a gray morning", "during the day")
_INDOOR_TIMES = ("in the morning", "late at night", "under warm lights", "in soft light", "on a quiet afternoon",
                 "after dinner", "before breakfast", "by lamplight", "on a lazy weekend")
SETTING_TIMES = {setting: (_INDOOR_TIMES if setting in ("kitchen", "living room", "bedroom") else
                           _OUTDOOR_TIMES + (("on a cold winter morning", "after a snowfall") if setting == "snow"
                                             else ()))
                 for setting in SETTING_PLACES}
COLOUR_WORDS = {
    "red": ("red", "red", "red", "bright red", "dark red"),
    "orange": ("orange",),
    "yellow": ("yellow", "yellow", "bright yellow"),
    "green": ("green", "green", "dark green", "light green"),
    "blue": ("blue", "blue", "blue", "light blue", "dark blue", "navy blue"),
    "purple": ("purple", "purple", "violet"),
    "pink": ("pink", "pink", "hot pink"),
    "brown": ("brown",),
    "black": ("black",),
    "white": ("white",),
    "grey": ("grey", "gray"),
}
SIZE_WORDS = {"small": ("small", "small", "little", "tiny"), "large": ("large", "large", "big", "big", "huge")}
# Pattern adjectives before the noun, and phrases after it ("an umbrella with stripes"); "plain" is rarely said.
PATTERN_ADJECTIVES = {"plain": ("plain", "solid colored"), "striped": ("striped", "striped", "stripy"),
                      "spotted": ("spotted", "spotted", "polka dot"), "checked": ("checkered", "plaid", "checked")}
PATTERN_PHRASES = {"plain": (), "striped": ("with stripes",), "spotted": ("with spots", "with polka dots"),
                   "checked": ("with a checkered pattern",)}
# Counts: exact numbers (1 .. 6) and "several" (three or more: kitm.relevance.things_facts.COUNT_SEVERAL).
COUNT_WORDS = {1: ("one", "a single", "a lone", "just one"), 2: ("two", "two", "two", "a pair of"), 3: ("three",),
               4: ("four",), 5: ("five",), 6: ("six",)}
SEVERAL_WORDS = ("several", "several", "a group of", "a bunch of", "many", "lots of", "a few")
# Group nouns that read better than "a group of" for some supercategories.
SEVERAL_BY_SUPERCATEGORY = {"animal": ("a herd of", "a group of", "several"), "person": ("a group of", "a crowd of",
                                                                                      "several")}
RELATION_PHRASES = {
    "left of": ("to the left of", "to the left of", "left of", "on the left side of"),
    "right of": ("to the right of", "to the right of", "right of", "on the right side of"),
    "above": ("above", "above", "over", "higher than"),
    "below": ("below", "below", "under", "beneath", "underneath"),
    "next to": ("next to", "next to", "beside", "near", "close to", "by"),
}
# Vague nouns: a mention of a supercategory (singular, plural). Supercategories without one are never named.
VAGUE_NOUNS = {
    "person": (("person", "people"), ("person", "people")),
    "animal": (("animal", "animals"), ("animal", "animals"), ("creature", "creatures")),
    "vehicle": (("vehicle", "vehicles"),),
    "food": (("plate of food", "plates of food"), ("snack", "snacks"), ("meal", "meals")),
    "furniture": (("piece of furniture", "pieces of furniture"),),
}
