//! Realistic rows: order events as an online shop's pipeline would carry them, for the
//! compression figures. The bench's other payloads ([`super::data::payload_sized`]) are a few
//! fields and then words padded out to 1 KiB, which compress far better than real rows; these
//! carry what real rows do: random-looking ids, names, e-mail addresses, timestamps, prices,
//! nested arrays of line items (1 to 11), addresses and a free-text note of varying length.
//! One row in five is a status update of about 200 B, the orders run from about 650 B to about
//! 2 KB, and the mean is about 900 B. Every row is generated from (partition, seq) alone, so a
//! run is repeatable and any row can be rebuilt to check it.

use std::fmt::Write as _;

const FIRST: &[&str] = &[
    "Maria", "Jonas", "Aiko", "Mateo", "Fatima", "Liam", "Chen", "Olga", "Kwame", "Sofia", "Noah",
    "Priya", "Lucas", "Amara", "Elena", "Tomasz", "Yuki", "Omar", "Ines", "Hugo", "Zanele",
    "Arjun", "Freya", "Diego", "Leila", "Mikael", "Ana", "Kenji", "Nadia", "Felix",
];
const LAST: &[&str] = &[
    "Schmidt", "Okafor", "Tanaka", "Garcia", "Haddad", "Murphy", "Wang", "Ivanova", "Mensah",
    "Rossi", "Keller", "Sharma", "Dubois", "Nwosu", "Popescu", "Nowak", "Sato", "Farouk", "Silva",
    "Lefebvre", "Dlamini", "Patel", "Larsen", "Moreno", "Karimi", "Virtanen",
];
const DOMAINS: &[&str] = &[
    "example.com",
    "mail.example.org",
    "post.example.net",
    "inbox.example.de",
    "example.co.uk",
];
const CITIES: &[(&str, &str, &str)] = &[
    ("Berlin", "DE", "EUR"),
    ("Lisbon", "PT", "EUR"),
    ("Osaka", "JP", "JPY"),
    ("Toronto", "CA", "CAD"),
    ("Lagos", "NG", "NGN"),
    ("Austin", "US", "USD"),
    ("Krakow", "PL", "PLN"),
    ("Leeds", "GB", "GBP"),
    ("Pune", "IN", "INR"),
    ("Bergen", "NO", "NOK"),
];
const STREETS: &[&str] = &[
    "Market Street",
    "Rua Augusta",
    "Hauptstrasse",
    "Elm Avenue",
    "Station Road",
    "Quay Lane",
    "Ulica Dluga",
    "Maple Drive",
];
const ADJECTIVES: &[&str] = &[
    "stainless",
    "organic",
    "wireless",
    "compact",
    "ergonomic",
    "waterproof",
    "recycled",
    "premium",
    "handmade",
    "foldable",
    "insulated",
    "vintage",
    "ceramic",
    "bamboo",
    "carbon",
];
const NOUNS: &[&str] = &[
    "water bottle",
    "desk lamp",
    "running shoes",
    "backpack",
    "coffee grinder",
    "yoga mat",
    "headphones",
    "notebook",
    "chef knife",
    "rain jacket",
    "phone case",
    "tea kettle",
    "bike light",
    "wool socks",
    "cutting board",
];
const SIZES: &[&str] = &["S", "M", "L", "XL", "500ml", "750ml", "1l", "one size"];
const COLOURS: &[&str] = &["black", "white", "sage", "navy", "sand", "red", "grey"];
const NOTE_WORDS: &[&str] = &[
    "please",
    "leave",
    "the",
    "parcel",
    "at",
    "front",
    "door",
    "with",
    "neighbour",
    "ring",
    "bell",
    "twice",
    "gift",
    "wrap",
    "if",
    "possible",
    "no",
    "invoice",
    "in",
    "box",
    "deliver",
    "after",
    "6pm",
    "call",
    "before",
    "arrival",
    "side",
    "entrance",
    "fragile",
    "handle",
    "care",
    "thanks",
    "birthday",
    "present",
    "for",
    "my",
    "sister",
    "office",
    "reception",
    "floor",
];
const STATUSES: &[&str] = &[
    "placed",
    "paid",
    "packed",
    "shipped",
    "delivered",
    "refunded",
];
const CHANNELS: &[&str] = &["web", "ios", "android", "store", "partner"];
const PAYMENTS: &[&str] = &["card", "paypal", "invoice", "apple_pay", "klarna", "bank"];
const SHIPPING: &[&str] = &["standard", "express", "pickup", "same_day"];
const TAGS: &[&str] = &[
    "first_order",
    "promo",
    "loyalty",
    "b2b",
    "gift",
    "subscription",
    "backorder",
    "priority",
];

/// A small deterministic generator (xorshift64*), seeded from (partition, seq).
struct Rng(u64);

impl Rng {
    fn new(partition: u32, seq: u64) -> Rng {
        let mut x =
            (seq ^ u64::from(partition).rotate_left(40)).wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((x ^ (x >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len() as u64) as usize]
    }

    fn hex(&mut self, out: &mut String, digits: usize) {
        let v = self.next();
        let _ = write!(
            out,
            "{:0width$x}",
            v >> (64 - 4 * digits.min(16)),
            width = digits
        );
    }
}

/// The order event `seq` of `partition`: one JSON object, valid UTF-8 JSON, 250 B to 2 KB.
pub fn order_row(partition: u32, seq: u64) -> Vec<u8> {
    let mut r = Rng::new(partition, seq);
    let mut s = String::with_capacity(1024);
    // Event time: a day's worth of seconds from 2026-12-06T00:00:00Z, rising with seq.
    let secs = 1_796_515_200 + seq / 4 + r.below(2);
    let ts = jiff::Timestamp::from_second(secs as i64).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    s.push_str("{\"event_id\":\"");
    r.hex(&mut s, 16);
    r.hex(&mut s, 16);
    let _ = write!(
        s,
        "\",\"type\":\"order.{}\",\"at\":\"{}.{:03}Z\",\"order_id\":\"ord_",
        r.pick(STATUSES),
        ts.strftime("%Y-%m-%dT%H:%M:%S"),
        r.below(1000)
    );
    r.hex(&mut s, 12);
    // One event in five is a status update of an order: a small row.
    if r.below(5) == 0 {
        let _ = write!(
            s,
            "\",\"carrier\":\"{}\",\"tracking\":\"{}{:010}\",\"warehouse\":\"wh-{}\"}}",
            ["dhl", "ups", "fedex", "postnl", "royal_mail"][r.below(5) as usize],
            ["JD", "1Z", "TR"][r.below(3) as usize],
            r.below(10_000_000_000),
            r.below(40)
        );
        return s.into_bytes();
    }
    let first = r.pick(FIRST);
    let last = r.pick(LAST);
    let (city, country, currency) = *r.pick(CITIES);
    let _ = write!(
        s,
        "\",\"channel\":\"{}\",\"customer\":{{\"id\":\"cus_{:08}\",\"name\":\"{first} {last}\",\
         \"email\":\"{}.{}{}@{}\",\"tier\":\"{}\",\"orders\":{}}}",
        r.pick(CHANNELS),
        r.below(100_000_000),
        first.to_ascii_lowercase(),
        last.to_ascii_lowercase(),
        r.below(100),
        r.pick(DOMAINS),
        ["bronze", "silver", "gold", "platinum"][r.below(4) as usize],
        r.below(250),
    );
    s.push_str(",\"items\":[");
    // Most orders hold a few items; one in four holds 4 to 11.
    let items = if r.below(4) == 0 {
        4 + r.below(8)
    } else {
        1 + r.below(4)
    };
    let mut total_cents = 0u64;
    for i in 0..items {
        if i > 0 {
            s.push(',');
        }
        let qty = 1 + r.below(4);
        let cents = 199 + r.below(25_000);
        total_cents += qty * cents;
        let _ = write!(
            s,
            "{{\"sku\":\"SKU-{:05}\",\"name\":\"{} {}\",\"variant\":{{\"size\":\"{}\",\
             \"colour\":\"{}\"}},\"qty\":{qty},\"unit_price\":{}.{:02}}}",
            r.below(100_000),
            r.pick(ADJECTIVES),
            r.pick(NOUNS),
            r.pick(SIZES),
            r.pick(COLOURS),
            cents / 100,
            cents % 100,
        );
    }
    let shipping_cents = [0, 495, 995, 1490][r.below(4) as usize];
    total_cents += shipping_cents;
    let _ = write!(
        s,
        "],\"shipping\":{{\"method\":\"{}\",\"cost\":{}.{:02},\"address\":{{\"street\":\"{} {}\",\
         \"city\":\"{city}\",\"postcode\":\"{:05}\",\"country\":\"{country}\"}}}},\
         \"payment\":{{\"method\":\"{}\",\"status\":\"captured\",\"reference\":\"pay_",
        r.pick(SHIPPING),
        shipping_cents / 100,
        shipping_cents % 100,
        1 + r.below(240),
        r.pick(STREETS),
        r.below(100_000),
        r.pick(PAYMENTS),
    );
    r.hex(&mut s, 16);
    let _ = write!(
        s,
        "\"}},\"total\":{}.{:02},\"currency\":\"{currency}\",\"tags\":[",
        total_cents / 100,
        total_cents % 100
    );
    let tags = r.below(4);
    for i in 0..tags {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "\"{}\"", r.pick(TAGS));
    }
    s.push_str("],\"note\":\"");
    let words = [0, 0, 3, 8, 15, 30][r.below(6) as usize];
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(r.pick::<&str>(NOTE_WORDS));
    }
    s.push_str("\"}");
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_json_of_varied_size_and_repeatable() {
        let mut sizes = Vec::new();
        for p in 0..4 {
            for seq in (0..20_000).step_by(7) {
                let row = order_row(p, seq);
                assert_eq!(row, order_row(p, seq), "{p}/{seq}");
                let v: serde_json::Value = serde_json::from_slice(&row)
                    .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&row)));
                assert!(
                    v["items"].as_array().is_some_and(|a| !a.is_empty())
                        || v["tracking"].is_string()
                );
                sizes.push(row.len());
            }
        }
        sizes.sort_unstable();
        let mean = sizes.iter().sum::<usize>() / sizes.len();
        assert!(sizes[0] >= 180, "smallest {}", sizes[0]);
        assert!(
            sizes[sizes.len() - 1] <= 2100,
            "largest {}",
            sizes[sizes.len() - 1]
        );
        assert!((700..1100).contains(&mean), "mean {mean}");
        eprintln!(
            "order rows: {} to {} B, mean {mean}",
            sizes[0],
            sizes[sizes.len() - 1]
        );
        assert_ne!(order_row(0, 1), order_row(1, 1));
        assert_ne!(order_row(0, 1), order_row(0, 2));
    }
}
