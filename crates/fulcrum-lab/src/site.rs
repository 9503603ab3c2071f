//! The generated website of the `java-slb` scenario: HTML pages, each with a few images, of mixed
//! sizes (most small, a few large, as on the paper's 152 MB site), up to a total size. Files are
//! named `NAME-SIZE.EXT` under `/site/`, so a real server serves any of them without a copy on
//! disk; each client browses its own fixed list of pages and their images.

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use super::client::Link;

/// One page and the images it shows.
#[derive(Debug, Clone)]
pub struct Page {
    pub html: String,
    pub images: Vec<String>,
}

/// Pages with images until `total_bytes` is reached; the same seed gives the same site.
pub fn generate(total_bytes: u64, seed: u64) -> Vec<Page> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut pages = Vec::new();
    let mut total = 0u64;
    let mut n = 0usize;
    while total < total_bytes || pages.is_empty() {
        let size = log_uniform(&mut rng, 2 << 10, 40 << 10);
        total += size;
        let html = format!("/site/page{}-{size}.html", pages.len());
        let mut images = Vec::new();
        for _ in 0..rng.random_range(2..=8) {
            let size = match rng.random_range(0..100) {
                0..70 => log_uniform(&mut rng, 1 << 10, 30 << 10),
                70..95 => log_uniform(&mut rng, 30 << 10, 300 << 10),
                _ => log_uniform(&mut rng, 300 << 10, 3 << 20),
            };
            let ext = ["jpg", "png", "gif"][n % 3];
            images.push(format!("/site/img{n}-{size}.{ext}"));
            n += 1;
            total += size;
        }
        pages.push(Page { html, images });
    }
    pages
}

/// A client's fixed list of links: `pages` pages of the site, each followed by its images.
pub fn links_for_client(site: &[Page], pages: usize, seed: u64) -> Vec<Link> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut links = Vec::new();
    for _ in 0..pages {
        if let Some(p) = site.choose(&mut rng) {
            links.push(Link::get(p.html.clone()));
            links.extend(p.images.iter().cloned().map(Link::get));
        }
    }
    links
}

/// The size a site path names.
#[cfg(test)]
pub fn size_of(path: &str) -> u64 {
    path.rsplit_once('-').and_then(|(_, rest)| rest.split('.').next()?.parse().ok()).unwrap_or(0)
}

fn log_uniform(rng: &mut SmallRng, lo: u64, hi: u64) -> u64 {
    let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
    rng.random_range(a..b).exp() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_site_reaches_its_size_and_is_the_same_for_a_seed() {
        let site = generate(20 << 20, 7);
        let total: u64 = site.iter().map(|p| size_of(&p.html) + p.images.iter().map(|i| size_of(i)).sum::<u64>()).sum();
        assert!((20 << 20..24 << 20).contains(&total), "{total}");
        assert_eq!(generate(20 << 20, 7)[3].images, site[3].images);
        let small = site.iter().flat_map(|p| &p.images).filter(|i| size_of(i) < 30 << 10).count();
        let all = site.iter().map(|p| p.images.len()).sum::<usize>();
        assert!(small * 2 > all, "most files are small: {small} of {all}");
    }

    #[test]
    fn a_client_list_is_pages_followed_by_their_images() {
        let site = generate(1 << 20, 1);
        let links = links_for_client(&site, 3, 2);
        assert!(links[0].path.ends_with(".html"));
        assert_eq!(links.iter().filter(|l| l.path.ends_with(".html")).count(), 3);
        assert_eq!(links, links_for_client(&site, 3, 2));
    }
}
