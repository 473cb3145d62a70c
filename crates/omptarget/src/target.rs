//! The data-mapping constructs' entry (`target [enter|exit] data`,
//! `target update`): INFO header, device, dispatch to enter/exit/update.

use crate::abi::*;
use crate::args::Args;
use crate::construct::{begin_fail_msgs, print_args, Ctx};
use crate::devices;
use crate::enter::{data_begin, process_attaches};
use crate::exit::data_end;
use crate::msg::{self, Loc};
use crate::report::{after_block, target_failed};
use crate::update::data_update;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    Begin,
    End,
    Update,
}

pub fn target_data(loc: IdentRef, device: i64, a: &Args, kind: DataKind) {
    let Some(d) = devices::resolve(device, loc) else {
        return;
    };
    let info = msg::info();
    if info & msg::INFO_KERNEL_ARGS != 0 {
        let what = match kind {
            DataKind::Begin => "Entering OpenMP data region with being_mapper",
            DataKind::End => "Exiting OpenMP data region with end_mapper",
            DataKind::Update => "Updating data within the OpenMP data region with update_mapper",
        };
        msg::dev_info(
            d.id,
            &format!(
                "{what} at {} with {} arguments:",
                Loc::from_ident(loc),
                a.n()
            ),
        );
        print_args(d, a);
    }
    d.ensure_loaded();
    let r = match kind {
        DataKind::Begin => {
            let mut ctx = Ctx::default();
            let r = data_begin(d, a, &mut ctx);
            if r.is_ok() {
                process_attaches(d, &mut ctx);
            } else if let Err(f) = r {
                begin_fail_msgs(f);
            }
            r
        }
        DataKind::End => data_end(d, a, true),
        DataKind::Update => data_update(d, a),
    };
    if r.is_err() {
        target_failed(loc);
    }
    if info & msg::INFO_DUMP_TABLE != 0 {
        after_block(&Loc::from_ident(loc));
    }
}
