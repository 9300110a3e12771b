"""The product-type vocabulary of the generated WebShop catalogue (data only, no logic).

Each ProductType names where it sits in the store (a breadcrumb, as WebShop's `product_category`),
the search query it was "scraped" under (WebShop's `query`), the noun phrase its titles use, the
attributes a product of the type may have, its buying options (name -> values) and a price range.

Vocabulary rules the tests enforce: no option value appears inside a product's own text (WebShop's
option reward also credits an option value found in the title or description), and no two values
of a non-size option of one type are fuzzy-equal (token_set_ratio > 85), so a wrong choice earns
no option credit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    """A kind of product: shelf, query, title noun, attribute pool, option pools, price range."""

    key: str
    breadcrumb: tuple[str, ...]
    query: str
    noun: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]


def _t(key: str, crumb: str, query: str, noun: str, attrs: str, options: dict[str, str], price: tuple[float, float]) -> ProductType:
    """Compact constructor: `crumb` joined by ' › ', `attrs` and option values by ' | '."""
    opts = tuple((name, tuple(v.strip() for v in values.split("|"))) for name, values in options.items())
    return ProductType(
        key, tuple(c.strip() for c in crumb.split("›")), query, noun,
        tuple(a.strip() for a in attrs.split("|")), opts, price,
    )


BEAUTY = "Beauty & Personal Care"
GROCERY = "Grocery & Gourmet Food"
FASHION = "Clothing, Shoes & Jewelry"
HOME = "Home & Kitchen"
PHONES = "Cell Phones & Accessories"
ELECTRONICS = "Electronics"
PETS = "Pet Supplies"
HEALTH = "Health & Household"
SPORTS = "Sports & Outdoors"

APPAREL_SIZES = "small | medium | large | x-large | xx-large"
SHOE_SIZES = "us 6 | us 7 | us 8 | us 9 | us 10 | us 11 | us 12"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    _t("shampoo", f"{BEAUTY} › Hair Care › Shampoo & Conditioner › Shampoos", "shampoo", "Shampoo",
       "sulfate free | paraben free | cruelty free | natural ingredients | dry hair | color treated hair | vegan",
       {"size": "8 fl oz | 12 fl oz | 16.9 fl oz | 33.8 fl oz", "scent": "coconut | lavender | tea tree | eucalyptus"},
       (6.0, 38.0)),
    _t("deodorant", f"{BEAUTY} › Personal Care › Deodorants & Antiperspirants › Deodorants", "deodorant",
       "Deodorant", "aluminum free | sensitive skin | long lasting | natural ingredients | cruelty free | baking soda free",
       {"scent": "bright citrus | calming lavender | ginger fresh | unscented", "size": "2.65 ounce | 3 ounce (pack of 1) | 3 ounce (pack of 2)"},
       (5.0, 25.0)),
    _t("perfume", f"{BEAUTY} › Fragrance › Women's › Eau de Toilette", "eau de toilette", "Eau de Toilette Spray",
       "long lasting | travel size | gift set | floral notes | cruelty free",
       {"size": "1 fl oz | 1.7 fl oz | 3.4 fl oz | 6.76 fl oz"}, (18.0, 120.0)),
    _t("lipstick", f"{BEAUTY} › Makeup › Lips › Lipstick", "lipstick", "Matte Lipstick",
       "long lasting | cruelty free | vegan | paraben free | highly pigmented | moisturizing formula",
       {"color": "ruby red | nude pink | berry | coral | plum"}, (5.0, 30.0)),
    _t("moisturizer", f"{BEAUTY} › Skin Care › Face › Creams & Moisturizers › Face Moisturizers", "face moisturizer",
       "Face Moisturizer Cream", "fine lines | dry skin | sensitive skin | fragrance free | hyaluronic acid | non greasy",
       {"size": "1.7 ounce | 2.5 ounce | 4 ounce"}, (9.0, 60.0)),
    _t("toothpaste", f"{BEAUTY} › Oral Care › Toothpaste", "toothpaste", "Toothpaste",
       "fluoride free | sensitive teeth | natural ingredients | fresh breath | teeth whitening",
       {"flavor": "peppermint | cinnamon | charcoal | fresh citrus", "size": "4 ounce (pack of 1) | 4 ounce (pack of 3)"},
       (3.0, 20.0)),
    _t("nail_polish", f"{BEAUTY} › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish", "nail polish",
       "Nail Polish", "quick drying | long lasting | non toxic | cruelty free | chip resistant",
       {"color": "cherry red | midnight blue | pastel pink | glitter silver | jade"}, (4.0, 22.0)),
    _t("protein_bar", f"{GROCERY} › Snack Foods › Bars › Protein Bars", "protein bars", "Protein Bars",
       "gluten free | high protein | low sugar | non gmo | keto friendly | individually wrapped",
       {"flavor": "peanut butter | chocolate chip | cookie dough | salted caramel | birthday cake", "size": "12 count | 24 count"},
       (12.0, 45.0)),
    _t("coffee", f"{GROCERY} › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans", "whole bean coffee",
       "Whole Bean Coffee", "usda organic | fair trade | non gmo | kosher certified | low acid",
       {"roast": "light roast | medium roast | dark roast", "size": "12 ounce | 2 pound | 5 pound"}, (8.0, 65.0)),
    _t("tea", f"{GROCERY} › Beverages › Coffee, Tea & Cocoa › Tea › Green Tea", "green tea", "Green Tea Bags",
       "usda organic | decaffeinated | non gmo | sugar free | kosher certified",
       {"flavor": "jasmine | matcha | mint | lemon ginger", "size": "20 count | 40 count | 100 count"}, (4.0, 28.0)),
    _t("chips", f"{GROCERY} › Snack Foods › Chips & Crisps › Potato Chips", "potato chips", "Kettle Potato Chips",
       "gluten free | non gmo | dairy free | vegan | low sodium",
       {"flavor": "sea salt | sour cream onion | barbecue | jalapeno", "size": "1 ounce (pack of 24) | 5 ounce (pack of 6)"},
       (10.0, 35.0)),
    _t("olive_oil", f"{GROCERY} › Pantry Staples › Cooking & Baking › Oils › Olive Oil", "olive oil", "Olive Oil",
       "extra virgin | cold pressed | usda organic | non gmo | kosher certified",
       {"size": "16.9 fl oz | 25.3 fl oz | 101 fl oz"}, (9.0, 55.0)),
    _t("gummies", f"{GROCERY} › Candy & Chocolate › Gummy Candies", "gummy candy", "Gummy Candy",
       "gluten free | fat free | individually wrapped | vegan | natural flavors",
       {"flavor": "sour cherry | tropical fruit | watermelon | mixed berry", "size": "2 pound bag | 5 pound bag"},
       (7.0, 32.0)),
    _t("granola", f"{GROCERY} › Breakfast Foods › Cereals › Granola", "granola", "Granola Cereal",
       "gluten free | high fiber | low sugar | whole grain | non gmo | vegan",
       {"flavor": "honey almond | maple pecan | dark cocoa | blueberry", "size": "11 ounce | 22 ounce | 32 ounce"},
       (5.0, 26.0)),
    _t("tshirt", f"{FASHION} › Men › Clothing › Shirts › T-Shirts", "men t-shirt", "Men's Crew Neck T-Shirt",
       "machine wash | cotton spandex | short sleeve | slim fit | moisture wicking | relaxed fit",
       {"color": "heather grey | navy | jet | olive | ivory", "size": APPAREL_SIZES}, (9.0, 35.0)),
    _t("jumpsuit", f"{FASHION} › Women › Clothing › Jumpsuits, Rompers & Overalls", "women jumpsuit",
       "Women's Jumpsuit Romper", "slim fit | machine wash | high waist | polyester spandex | daily wear | wide leg",
       {"color": "green stripe | polka dot | wine red | khaki", "size": APPAREL_SIZES}, (19.0, 60.0)),
    _t("running_shoes", f"{FASHION} › Men › Shoes › Athletic › Running › Road Running", "men running shoes",
       "Men's Running Shoes", "non slip | rubber sole | lightweight | arch support | lace up | memory foam insole",
       {"color": "triple jet | grey teal | navy orange | ivory", "size": SHOE_SIZES}, (29.0, 110.0)),
    _t("sandals", f"{FASHION} › Women › Shoes › Sandals › Flat Sandals", "women sandals", "Women's Flat Sandals",
       "open toe | ankle strap | rubber sole | arch support | faux leather",
       {"color": "tan | beige | cognac | rose gold", "size": SHOE_SIZES}, (15.0, 55.0)),
    _t("leggings", f"{FASHION} › Women › Clothing › Active › Active Leggings", "women leggings", "Women's Yoga Leggings",
       "high waist | tummy control | moisture wicking | squat proof | four way stretch",
       {"color": "jet | deep teal | burgundy | mauve", "size": APPAREL_SIZES}, (14.0, 45.0)),
    _t("beanie", f"{FASHION} › Men › Accessories › Hats & Caps › Skullies & Beanies", "winter beanie", "Knit Winter Beanie",
       "hand wash | soft acrylic | fleece lining | one size fits most",
       {"color": "charcoal | mustard | cream | forest green"}, (8.0, 25.0)),
    _t("pillow_covers", f"{HOME} › Home Décor Products › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
       "throw pillow covers", "Throw Pillow Covers", "machine washable | hidden zipper | living room | super soft | double sided",
       {"color": "mustard yellow | sage green | dusty rose | charcoal grey", "size": "18 x 18 inch | 20 x 20 inch | 12 x 20 inch"},
       (9.0, 30.0)),
    _t("sheets", f"{HOME} › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets", "bed sheet set", "Bed Sheet Set",
       "deep pocket | wrinkle free | machine washable | breathable | hypoallergenic | fade resistant",
       {"color": "ivory | light grey | navy | sage", "size": "twin | full | queen | king"}, (22.0, 80.0)),
    _t("curtains", f"{HOME} › Home Décor Products › Window Treatments › Curtains & Drapes › Panels", "blackout curtains",
       "Room Darkening Curtains", "thermal insulated | noise reducing | grommet top | living room | energy saving",
       {"color": "navy | greyish white | taupe | emerald", "size": "42 x 63 inch | 52 x 84 inch | 52 x 95 inch"},
       (18.0, 70.0)),
    _t("mug", f"{HOME} › Kitchen & Dining › Dining & Entertaining › Cups, Mugs & Saucers › Coffee Mugs", "coffee mug",
       "Ceramic Coffee Mug", "microwave safe | dishwasher safe | lead free | large capacity | gift box",
       {"color": "speckled cream | matte sage | cobalt | terracotta", "size": "12 oz | 16 oz | 20 oz"}, (7.0, 28.0)),
    _t("storage_baskets", f"{HOME} › Storage & Organization › Baskets, Bins & Containers › Storage Baskets",
       "storage baskets", "Fabric Storage Baskets", "foldable | easy to clean | sturdy handles | space saving | closet organizer",
       {"color": "linen beige | slate | oatmeal | ash", "size": "set of 3 | set of 6"}, (12.0, 40.0)),
    _t("desk_lamp", f"{HOME} › Lighting & Ceiling Fans › Lamps & Shades › Desk Lamps", "led desk lamp", "LED Desk Lamp",
       "dimmable | eye caring | usb charging port | touch control | energy efficient",
       {"color": "jet | pearl | silver"}, (16.0, 60.0)),
    _t("phone_case", f"{PHONES} › Cases, Holsters & Sleeves › Basic Cases", "phone case", "Protective Phone Case",
       "shockproof | wireless charging compatible | slim profile | raised edges | scratch resistant",
       {"color": "clear | frosted jet | midnight green | lilac", "model": "iphone 13 | iphone 14 pro | galaxy s22 | pixel 7"},
       (7.0, 30.0)),
    _t("screen_protector", f"{PHONES} › Accessories › Screen Protectors", "screen protector", "Tempered Glass Screen Protector",
       "bubble free | easy installation | case friendly | 9h hardness | anti fingerprint",
       {"model": "iphone 13 | iphone 14 pro | galaxy s22 | pixel 7", "size": "2 pack | 3 pack"}, (5.0, 18.0)),
    _t("earbuds", f"{ELECTRONICS} › Headphones, Earbuds & Accessories › Earbud Headphones", "wireless earbuds",
       "Wireless Earbuds", "noise cancelling | long battery life | water resistant | fast charging | built in microphone",
       {"color": "jet | pearl | navy"}, (19.0, 130.0)),
    _t("usb_cable", f"{ELECTRONICS} › Computers & Accessories › Cables › USB Cables", "usb c cable", "USB C Cable",
       "fast charging | braided nylon | high speed data | durable",
       {"size": "3 ft | 6 ft | 10 ft", "color": "jet | silver grey | red"}, (6.0, 22.0)),
    _t("speaker", f"{ELECTRONICS} › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
       "bluetooth speaker", "Portable Bluetooth Speaker", "waterproof | long battery life | deep bass | built in microphone | stereo pairing",
       {"color": "jet | cobalt | red | camo"}, (22.0, 120.0)),
    _t("dog_toy", f"{PETS} › Dogs › Toys › Chew Toys", "dog chew toy", "Dog Chew Toy",
       "non toxic | durable | aggressive chewers | teeth cleaning | natural rubber",
       {"size": "small | medium | large", "color": "orange | blue | green"}, (6.0, 25.0)),
    _t("cat_litter", f"{PETS} › Cats › Litter & Housebreaking › Litter", "cat litter", "Clumping Cat Litter",
       "odor control | low dust | unscented | natural clay | multi cat",
       {"size": "10 pound | 20 pound | 40 pound"}, (8.0, 35.0)),
    _t("vitamins", f"{HEALTH} › Vitamins, Minerals & Supplements › Multivitamins", "multivitamin gummies",
       "Multivitamin Gummies", "gluten free | non gmo | sugar free | vegan | natural flavors",
       {"flavor": "orange | strawberry | mixed berry", "size": "60 count | 120 count | 180 count"}, (9.0, 40.0)),
    _t("yoga_mat", f"{SPORTS} › Exercise & Fitness › Yoga › Yoga Mats", "yoga mat", "Yoga Mat",
       "non slip | extra thick | eco friendly | carrying strap | high density",
       {"color": "lavender | teal | jet | coral", "size": "6mm | 8mm | 10mm"}, (15.0, 60.0)),
    _t("water_bottle", f"{SPORTS} › Outdoor Recreation › Camping & Hiking › Hydration & Filtration › Water Bottles",
       "water bottle", "Insulated Water Bottle", "bpa free | leak proof | double wall | vacuum insulated | dishwasher safe",
       {"color": "jet | white | sky blue | fuchsia", "size": "24 oz | 32 oz | 40 oz"}, (12.0, 45.0)),
)

# Brand syllables: a brand is two or three of these (deterministic per product); titles start with it.
BRAND_PARTS = (
    "lu", "vo", "ra", "ke", "mi", "zan", "tor", "bel", "no", "vi", "qua", "ren", "sol", "da", "fi", "mar",
    "xo", "pel", "ti", "gra", "on", "sey", "lin", "bo", "ca", "dro", "ve", "ami", "kor", "tes",
)

# Title tails and sentence frames (no option values may appear in these; see the module docstring).
TITLE_TAILS = ("", "", "Premium Quality", "Everyday Essentials", "Value Pack", "Best Seller", "New Edition")
DESCRIPTION_FRAMES = (
    "{brand} makes this {noun} for people who want {first} without compromise.",
    "Meet the {noun} from {brand}: {first}, well made and quality checked.",
    "This {noun} by {brand} is {first} and built for daily use.",
)
FEATURE_FRAMES = (
    "{Attr}: verified by our quality team",
    "{Attr} for peace of mind",
    "{Attr}, as promised on the label",
)
REVIEW_TEXTS = (
    (5, "Exactly what I wanted", "Works great and arrived quickly. Would buy again."),
    (4, "Good value", "Does the job well; packaging could be better."),
    (5, "Love it", "My second order of this, still very happy."),
    (3, "It is okay", "Not bad for the money, but nothing special."),
    (2, "Not for me", "Did not meet my expectations, returned it."),
    (4, "Solid choice", "Quality is good and it matches the listing."),
)
