"""Build small, real SQLite databases and text2sql rows (question + gold SQL) over them.

    python examples/text2sql/build_sample_databases.py OUT_DIR [--layout plain|spider|bird|synsql]

Three databases with realistic schemas (keys, foreign keys, dates, money, NULLs) and
deterministic rows: ``retail`` (customers, products, orders, order_items), ``university``
(departments, instructors, students, courses, enrollments) and ``flights`` (airports, airlines,
flights). Writes ``OUT_DIR/rows.jsonl``; use ``db_path=OUT_DIR`` in the env config.

* ``plain`` (default): ``OUT_DIR/databases/<db_id>.sqlite``, rows carry ``db_file``.
* ``spider``/``bird``/``synsql``: the public folder layout, rows carry ``data`` and ``db_id``;
  a questions file in that dataset's format is written too, so the public loader can read it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sqlite3
import sys
from typing import Any, Callable, Dict, List, Tuple

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from skyrl_gym.envs.sql.databases import DATASET_DB_FOLDERS, schema_ddl  # noqa: E402
from skyrl_gym.envs.sql.dataset import QUESTION_FILES, make_row  # noqa: E402

FIRST = ["Ana", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam",
         "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wen", "Yusuf", "Zoe"]
LAST = ["Garcia", "Smith", "Nguyen", "Kowalski", "Okafor", "Rossi", "Tanaka", "Müller", "Haddad", "Larsen",
        "Silva", "Dubois", "Kim", "Novak", "Cohen", "Patel", "Ivanova", "O'Brien"]
CITIES = [("Lisbon", "Portugal"), ("Porto", "Portugal"), ("Madrid", "Spain"), ("Lyon", "France"), ("Paris", "France"),
          ("Berlin", "Germany"), ("Munich", "Germany"), ("Oslo", "Norway"), ("Warsaw", "Poland"), ("Rome", "Italy")]
CATEGORIES = {
    "Books": ["Atlas of Rivers", "Cooking with Herbs", "Modern Poetry", "Field Guide to Birds", "SQL Basics"],
    "Garden": ["Pruning Shears", "Watering Can", "Seed Tray", "Compost Bin", "Garden Gloves"],
    "Kitchen": ["Chef Knife", "Cast Iron Pan", "Espresso Cups", "Cutting Board", "Tea Kettle"],
    "Outdoor": ["Trail Backpack", "Camping Stove", "Headlamp", "Sleeping Bag", "Water Filter"],
    "Electronics": ["USB-C Charger", "Noise-Cancelling Headphones", "E-Reader", "Smart Plug", "Webcam"],
}


def _date(rng: random.Random, start: dt.date, days: int) -> str:
    return (start + dt.timedelta(days=rng.randrange(days))).isoformat()


def build_retail(path: str, rng: random.Random) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers (
            customer_id INTEGER PRIMARY KEY, first_name TEXT NOT NULL, last_name TEXT NOT NULL,
            email TEXT UNIQUE, city TEXT, country TEXT, signup_date TEXT NOT NULL);
        CREATE TABLE products (
            product_id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL,
            unit_price REAL NOT NULL CHECK (unit_price > 0), in_stock INTEGER NOT NULL DEFAULT 1);
        CREATE TABLE orders (
            order_id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
            order_date TEXT NOT NULL, status TEXT NOT NULL CHECK (status IN ('placed','shipped','delivered','cancelled')),
            shipping_city TEXT);
        CREATE TABLE order_items (
            order_id INTEGER NOT NULL REFERENCES orders(order_id), product_id INTEGER NOT NULL REFERENCES products(product_id),
            quantity INTEGER NOT NULL CHECK (quantity > 0), unit_price REAL NOT NULL, PRIMARY KEY (order_id, product_id));
        CREATE INDEX idx_orders_customer ON orders(customer_id);
        """
    )
    customers = []
    for cid in range(1, 201):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        city, country = rng.choice(CITIES)
        email = f"{first}.{last}{cid}@example.org".lower().replace("'", "") if rng.random() > 0.05 else None
        customers.append((cid, first, last, email, city, country, _date(rng, dt.date(2021, 1, 1), 900)))
    conn.executemany("INSERT INTO customers VALUES (?,?,?,?,?,?,?)", customers)
    products, pid = [], 0
    for category, names in CATEGORIES.items():
        for name in names:
            pid += 1
            products.append((pid, name, category, round(rng.uniform(4, 250), 2), int(rng.random() > 0.15)))
    conn.executemany("INSERT INTO products VALUES (?,?,?,?,?)", products)
    statuses = ["placed", "shipped", "delivered", "delivered", "delivered", "cancelled"]
    for oid in range(1, 1201):
        customer = rng.choice(customers)
        conn.execute(
            "INSERT INTO orders VALUES (?,?,?,?,?)",
            (oid, customer[0], _date(rng, dt.date(2022, 1, 1), 730), rng.choice(statuses), customer[4]),
        )
        for product in rng.sample(products, rng.randint(1, 4)):
            conn.execute("INSERT INTO order_items VALUES (?,?,?,?)", (oid, product[0], rng.randint(1, 5), product[3]))
    conn.commit()
    conn.close()


def build_university(path: str, rng: random.Random) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE departments (dept_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, building TEXT, budget REAL);
        CREATE TABLE instructors (
            instructor_id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept_id INTEGER REFERENCES departments(dept_id),
            salary REAL, hire_year INTEGER);
        CREATE TABLE students (
            student_id INTEGER PRIMARY KEY, name TEXT NOT NULL, major_dept_id INTEGER REFERENCES departments(dept_id),
            enrollment_year INTEGER NOT NULL, gpa REAL);
        CREATE TABLE courses (
            course_id TEXT PRIMARY KEY, title TEXT NOT NULL, dept_id INTEGER REFERENCES departments(dept_id),
            credits INTEGER NOT NULL, instructor_id INTEGER REFERENCES instructors(instructor_id));
        CREATE TABLE enrollments (
            student_id INTEGER REFERENCES students(student_id), course_id TEXT REFERENCES courses(course_id),
            term TEXT NOT NULL, grade TEXT, PRIMARY KEY (student_id, course_id, term));
        """
    )
    depts = [(1, "Computer Science", "Turing Hall", 2_400_000.0), (2, "Mathematics", "Noether Hall", 1_300_000.0),
             (3, "Physics", "Curie Hall", 1_900_000.0), (4, "History", "Bloch Hall", 700_000.0),
             (5, "Biology", "Darwin Hall", 1_600_000.0)]
    conn.executemany("INSERT INTO departments VALUES (?,?,?,?)", depts)
    instructors = []
    for iid in range(1, 31):
        instructors.append((iid, f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.randint(1, 5),
                            round(rng.uniform(55_000, 160_000), -2), rng.randint(1990, 2023)))
    conn.executemany("INSERT INTO instructors VALUES (?,?,?,?,?)", instructors)
    for sid in range(1, 401):
        gpa = round(rng.uniform(1.8, 4.0), 2) if rng.random() > 0.04 else None
        conn.execute("INSERT INTO students VALUES (?,?,?,?,?)",
                     (sid, f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.randint(1, 5), rng.randint(2019, 2024), gpa))
    prefixes = {1: "CS", 2: "MATH", 3: "PHYS", 4: "HIST", 5: "BIO"}
    topics = ["Introduction", "Methods", "Seminar", "Advanced Topics", "Laboratory", "Theory"]
    courses = []
    for dept_id, prefix in prefixes.items():
        for n, topic in enumerate(topics):
            dept_instructors = [i[0] for i in instructors if i[2] == dept_id] or [1]
            courses.append((f"{prefix}{101 + n * 100}", f"{depts[dept_id - 1][1]}: {topic}", dept_id,
                            rng.choice([3, 4, 6]), rng.choice(dept_instructors)))
    conn.executemany("INSERT INTO courses VALUES (?,?,?,?,?)", courses)
    grades = ["A", "A-", "B+", "B", "B-", "C+", "C", "D", "F", None]
    for sid in range(1, 401):
        for course in rng.sample(courses, rng.randint(2, 6)):
            conn.execute("INSERT INTO enrollments VALUES (?,?,?,?)",
                         (sid, course[0], rng.choice(["2023-fall", "2024-spring", "2024-fall"]), rng.choice(grades)))
    conn.commit()
    conn.close()


def build_flights(path: str, rng: random.Random) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE airports (code TEXT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, country TEXT NOT NULL);
        CREATE TABLE airlines (airline_id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);
        CREATE TABLE flights (
            flight_id INTEGER PRIMARY KEY, airline_id INTEGER REFERENCES airlines(airline_id),
            origin TEXT REFERENCES airports(code), destination TEXT REFERENCES airports(code),
            departure TEXT NOT NULL, duration_min INTEGER NOT NULL, delay_min INTEGER, seats INTEGER NOT NULL);
        """
    )
    airports = [("LIS", "Humberto Delgado", "Lisbon", "Portugal"), ("OPO", "Francisco Sá Carneiro", "Porto", "Portugal"),
                ("MAD", "Adolfo Suárez Barajas", "Madrid", "Spain"), ("CDG", "Charles de Gaulle", "Paris", "France"),
                ("LYS", "Saint-Exupéry", "Lyon", "France"), ("BER", "Brandenburg", "Berlin", "Germany"),
                ("MUC", "Franz Josef Strauss", "Munich", "Germany"), ("OSL", "Gardermoen", "Oslo", "Norway"),
                ("WAW", "Chopin", "Warsaw", "Poland"), ("FCO", "Fiumicino", "Rome", "Italy")]
    conn.executemany("INSERT INTO airports VALUES (?,?,?,?)", airports)
    airlines = [(1, "Atlantic Wings", "Portugal"), (2, "Iberian Air", "Spain"), (3, "Nordic Sky", "Norway"),
                (4, "Alpine Connect", "Germany"), (5, "Vistula Lines", "Poland")]
    conn.executemany("INSERT INTO airlines VALUES (?,?,?)", airlines)
    for fid in range(1, 3001):
        origin, destination = rng.sample(airports, 2)
        departure = dt.datetime(2024, 1, 1) + dt.timedelta(minutes=rng.randrange(365 * 24 * 60 // 15) * 15)
        delay = max(0, int(rng.gauss(12, 25))) if rng.random() > 0.03 else None
        conn.execute("INSERT INTO flights VALUES (?,?,?,?,?,?,?,?)",
                     (fid, rng.randint(1, 5), origin[0], destination[0], departure.isoformat(timespec="minutes"),
                      rng.randint(55, 240), delay, rng.choice([120, 150, 180, 220])))
    conn.commit()
    conn.close()


DATABASES: Dict[str, Callable[[str, random.Random], None]] = {
    "retail": build_retail,
    "university": build_university,
    "flights": build_flights,
}

# (db_id, question, gold SQL): answers checked by running the gold query when the rows are built.
QUESTIONS: List[Tuple[str, str, str]] = [
    ("retail", "How many customers live in Portugal?", "SELECT COUNT(*) FROM customers WHERE country = 'Portugal'"),
    ("retail", "List the names of products in the Kitchen category that are in stock.",
     "SELECT name FROM products WHERE category = 'Kitchen' AND in_stock = 1"),
    ("retail", "What is the total revenue of delivered orders (quantity times unit price)?",
     "SELECT ROUND(SUM(oi.quantity * oi.unit_price), 2) FROM order_items oi JOIN orders o ON o.order_id = oi.order_id WHERE o.status = 'delivered'"),
    ("retail", "Which product category sold the most units?",
     "SELECT p.category FROM order_items oi JOIN products p ON p.product_id = oi.product_id GROUP BY p.category ORDER BY SUM(oi.quantity) DESC LIMIT 1"),
    ("retail", "Give the first and last names of the 3 customers with the most orders.",
     "SELECT c.first_name, c.last_name FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id ORDER BY COUNT(*) DESC, c.customer_id LIMIT 3"),
    ("retail", "How many customers have no email address?", "SELECT COUNT(*) FROM customers WHERE email IS NULL"),
    ("university", "How many students major in Computer Science?",
     "SELECT COUNT(*) FROM students s JOIN departments d ON d.dept_id = s.major_dept_id WHERE d.name = 'Computer Science'"),
    ("university", "What is the average salary of instructors in each department? Give department name and average.",
     "SELECT d.name, AVG(i.salary) FROM instructors i JOIN departments d ON d.dept_id = i.dept_id GROUP BY d.name"),
    ("university", "List the titles of courses worth 6 credits.", "SELECT title FROM courses WHERE credits = 6"),
    ("university", "Which students have a GPA above 3.9? Give their names.", "SELECT name FROM students WHERE gpa > 3.9"),
    ("university", "How many enrollments received an A grade in the 2024-fall term?",
     "SELECT COUNT(*) FROM enrollments WHERE grade = 'A' AND term = '2024-fall'"),
    ("flights", "How many flights depart from Lisbon airport (LIS)?", "SELECT COUNT(*) FROM flights WHERE origin = 'LIS'"),
    ("flights", "Which airline has the highest average delay? Give its name.",
     "SELECT a.name FROM flights f JOIN airlines a ON a.airline_id = f.airline_id GROUP BY a.airline_id ORDER BY AVG(f.delay_min) DESC LIMIT 1"),
    ("flights", "List the codes of airports in Germany.", "SELECT code FROM airports WHERE country = 'Germany'"),
    ("flights", "How many flights from Madrid to Paris Charles de Gaulle are there?",
     "SELECT COUNT(*) FROM flights WHERE origin = 'MAD' AND destination = 'CDG'"),
    ("flights", "What is the longest scheduled flight duration in minutes?", "SELECT MAX(duration_min) FROM flights"),
]


def build(out_dir: str, layout: str = "plain", seed: int = 1234) -> List[Dict[str, Any]]:
    """Create the databases under ``out_dir`` in ``layout`` and return the rows (also written to rows.jsonl)."""
    if layout != "plain" and layout not in DATASET_DB_FOLDERS:
        raise ValueError(f"unknown layout {layout!r}; expected plain or one of {sorted(DATASET_DB_FOLDERS)}")
    db_files: Dict[str, str] = {}
    for index, (db_id, builder) in enumerate(DATABASES.items()):
        if layout == "plain":
            relative = os.path.join("databases", f"{db_id}.sqlite")
        else:
            relative = os.path.join(DATASET_DB_FOLDERS[layout], db_id, f"{db_id}.sqlite")
        path = os.path.join(out_dir, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.remove(path)
        builder(path, random.Random(seed + index))
        db_files[db_id] = relative
    schemas = {db_id: schema_ddl(os.path.join(out_dir, rel)) for db_id, rel in db_files.items()}
    rows = []
    for index, (db_id, question, gold) in enumerate(QUESTIONS):
        answer = sqlite3.connect(os.path.join(out_dir, db_files[db_id])).execute(gold).fetchall()
        if not answer:
            raise RuntimeError(f"gold query for {question!r} returned no rows; fix the sample data")
        if layout == "plain":
            row = make_row(question, gold, schemas[db_id], db_id=db_id, db_file=db_files[db_id],
                           data_source="skyrl-gym-sample-sql", index=index)
        else:
            row = make_row(question, gold, schemas[db_id], db_id=db_id, data=layout, index=index)
        rows.append(row)
    with open(os.path.join(out_dir, "rows.jsonl"), "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    if layout != "plain":  # a questions file in the public format, for load_public_rows
        gold_key = {"spider": "query", "bird": "SQL", "synsql": "sql"}[layout]
        questions_file = os.path.join(out_dir, QUESTION_FILES[layout]["train"])
        os.makedirs(os.path.dirname(questions_file), exist_ok=True)
        with open(questions_file, "w", encoding="utf-8") as handle:
            json.dump([{"db_id": d, "question": q, gold_key: g} for d, q, g in QUESTIONS], handle, indent=1)
    return rows


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--layout", default="plain", choices=["plain", *sorted(DATASET_DB_FOLDERS)])
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    rows = build(args.out_dir, args.layout, args.seed)
    print(f"wrote {len(DATABASES)} databases and {len(rows)} rows to {args.out_dir} (layout: {args.layout})")
    print(f"use env_config db_path={os.path.abspath(args.out_dir)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
